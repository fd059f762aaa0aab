"""Entry points run inside the OpenStack services' venv (never imported by dlinfra itself).

``osapps``: the WSGI applications gunicorn serves (``osapps:keystone()`` ...); ``nova_aio``: all of
Nova in one process. Both import only the services' own packages: that venv has no dlinfra.
"""
