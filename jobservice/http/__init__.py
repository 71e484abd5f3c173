"""The HTTP surfaces: the Flask app factory, the JSON API (api/) and the web pages (web/).

Surfaces import the domain packages; nothing in the domain imports them.
"""
