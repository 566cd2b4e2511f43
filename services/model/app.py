"""The model service as a FastStream app: `faststream run services.model.app:app`
(needs REDIS_URL), or `loopline serve model`."""

from services.app import build_app
from services.registry import factory

app, runtime = build_app(["model"], factory)
