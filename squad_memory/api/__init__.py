"""The REST API of squad_memory (optional extra: ``pip install 'squad-memory[api]'``).

Mount it with ``path("api/", include("squad_memory.api.urls"))``. Only this
subpackage imports Django REST Framework and drf-spectacular; the rest of
squad_memory works without them.
"""
