"""Workers: Celery tasks, the run pipeline, devices, validation and model adapters."""
