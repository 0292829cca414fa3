"""The REST API (``pip install 'squad-memory[api]'``), mounted with
``path("api/", include("squad_memory.api.urls"))``. Only this subpackage imports Django
REST Framework and drf-spectacular."""
