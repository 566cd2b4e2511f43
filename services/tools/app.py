"""The tools service as a FastStream app: `faststream run services.tools.app:app`
(needs REDIS_URL), or `loopline serve tools`."""

from services.app import build_app
from services.registry import factory

app, runtime = build_app(["tools"], factory)
