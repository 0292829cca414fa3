"""The demo project under an ASGI server: ``uvicorn project.asgi:application``.

``squad_memory.middleware.AdmissionMiddleware``, first in ``MIDDLEWARE`` (project/settings.py),
serves at most ``SQUAD_MEMORY["DATABASE_THREADS"]`` requests of the process at once, so the
process holds at most that many database connections whatever the number of clients; the
others wait their turn (docs/howto/deployment.md, "Connections under ASGI").
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
application = get_asgi_application()
