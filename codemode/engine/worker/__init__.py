"""The engine's worker processes (engine mode ``process``): stdlib-only, started as
``python -I -S codemode/engine/worker SITE_DIRS...`` (a zygote that forks one worker per use).
See `codemode.engine.worker._serve` for what a worker does and `_confine` for how it is held."""
