from django.conf import settings
from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
]

if settings.API:  # the api extra is installed; its docs are at api/docs/ and api/redoc/
    urlpatterns += [path("api/", include("squad_memory.api.urls"))]
