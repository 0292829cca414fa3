"""Sphinx configuration of squad_memory's documentation: ``make docs`` builds it into
``build/docs/`` (offline, warnings as errors). The pages are Markdown (MyST); the Python
reference comes from the docstrings (autodoc), so Django is set up with the demo
project's settings first."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import django

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
django.setup()

import squad_memory  # noqa: E402 - after django.setup()

project = "squad_memory"
author = "squad_memory developers"
project_copyright = "squad_memory developers, MIT licence"
version = release = squad_memory.__version__

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]
root_doc = "index"

# Links to a heading of another page: [text](../reference/settings.md#mode).
myst_heading_anchors = 3
myst_enable_extensions = ["deflist"]

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"show-inheritance": False}
# agent-squad's ChatStorage docstrings say its methods return a bool; ours return the list.
autodoc_inherit_docstrings = False
napoleon_google_docstring = True
napoleon_numpy_docstring = False

# Sphinx's own theme, with the system's fonts: the pages load nothing from another host.
html_theme = "alabaster"
html_title = f"squad_memory {release}"
html_theme_options = {
    "description": "Durable, compact conversation memory for Django and agent-squad.",
    "font_family": "system-ui, -apple-system, 'Segoe UI', sans-serif",
    "head_font_family": "system-ui, -apple-system, 'Segoe UI', sans-serif",
    "code_font_family": "ui-monospace, 'SFMono-Regular', Menlo, Consolas, monospace",
    "page_width": "1180px",
    "sidebar_width": "290px",
    "show_relbars": True,
    "show_powered_by": False,
}
html_sidebars = {"**": ["about.html", "navigation.html", "searchbox.html"]}
html_show_sourcelink = False
html_show_sphinx = False
html_static_path = ["_static"]  # custom.css, which alabaster links
