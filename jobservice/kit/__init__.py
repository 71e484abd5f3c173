"""The deployment kit: what a cluster runs, generated from the deployment file.

``deploy/kubernetes/`` holds the hand-written part (the API, the beat, optional components); the
worker workloads come from here, one StatefulSet per card group of the deployment file, so the kit
cannot drift from the file the API and the workers read (``jobservice kit generate``, checked in CI
with ``--check``). ``values.py`` is what an overlay chooses (its ``kit.yaml``: images, the device
plugin's resource, runtime class, node selectors, model volumes, autoscaling); ``workers.py`` builds
the objects; ``compose.py`` says what a compose override must hold for the same file. Nothing here
talks to a cluster.
"""
