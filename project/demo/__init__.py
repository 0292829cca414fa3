"""The demo: two offline agents, a keyword classifier and a scripted conversation."""
