"""The run service: a run directory's read-only HTTP JSON API and live page while it trains.

:mod:`mlxe.service.server` (``RunService``, started by ``run.serve``) serves :mod:`mlxe.service.app`
(starlette and uvicorn: ``pip install mlxe[serve]``); :mod:`mlxe.service.status` is what
``mlxe status RUN_DIR|URL`` prints, and needs neither.
"""
