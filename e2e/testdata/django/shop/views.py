import json

from django.http import HttpResponse


def index(request):
    # The page links the stylesheet the proxy serves from /static/.
    html = '<!doctype html><link rel="stylesheet" href="/static/css/app.css"><h1>shop</h1>'
    return HttpResponse(html, content_type="text/html; charset=utf-8")


def items(request):
    body = {"items": [{"id": i, "name": "item %d" % i} for i in range(50)],
            "forwarded_for": request.META.get("HTTP_X_FORWARDED_FOR", "")}
    return HttpResponse(json.dumps(body), content_type="application/json")
