from django.conf import settings
from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
]

if settings.API:  # the api extra is installed; its docs are at api/docs/ and api/redoc/
    urlpatterns += [
        # The browsable API's Log in / Log out, for users the admin's login does not admit.
        path("api-auth/", include("rest_framework.urls")),
        path("api/", include("squad_memory.api.urls")),
    ]
