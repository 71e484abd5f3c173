"""The request policy: what every request passes before its view runs (``steps``: allowed host and
origin, caller, rate, tenant, metrics), with the caller (``auth``) and cross-site checks
(``cross_site``) it is made of. Flask's hooks and the fast poll path both run it."""
