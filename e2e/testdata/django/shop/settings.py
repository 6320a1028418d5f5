# A minimal Django project, as deployed behind a proxy: gunicorn serves the
# application, the proxy serves /static/ (what `collectstatic` gathered)
# and the security headers, and rate-limits the API.
SECRET_KEY = "sluice-e2e-not-a-secret"
DEBUG = False
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "shop.urls"
INSTALLED_APPS = ["django.contrib.staticfiles"]
MIDDLEWARE = []
STATIC_URL = "/static/"
USE_TZ = True
# Behind a proxy that says the client's scheme.
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
LOGGING_CONFIG = None
