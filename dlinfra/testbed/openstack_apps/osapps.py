"""WSGI applications for gunicorn (``gunicorn --pythonpath THIS_FOLDER 'osapps:keystone()'``).

Why a wrapper: keystone, placement, glance and neutron parse ``sys.argv`` when their app is built,
and under gunicorn that is gunicorn's own command line: the workers exit on the unknown options and
gunicorn restarts them forever. Each factory empties the arguments first; the config comes from the
services' ``OS_*_CONFIG_DIR`` / ``OS_*_CONFIG_FILES`` variables, set by dlinfra.testbed.openstack.
"""

from __future__ import annotations

import sys
from typing import Any


def _plain_argv() -> None:
    sys.argv = sys.argv[:1]


def keystone() -> Any:
    _plain_argv()
    from keystone.wsgi.api import application

    return application


def placement() -> Any:
    _plain_argv()
    from placement.wsgi.api import application

    return application


def glance() -> Any:
    _plain_argv()
    from glance.wsgi.api import application

    return application


def neutron() -> Any:
    """Neutron's API, with SQLAlchemy's mappers configured first: without it the first ``GET /v2.0/ports``
    after a start answers 500 (an upstream bug; the warm-up request in the fixture covers the rest)."""
    _plain_argv()
    from neutron.wsgi.api import application
    from sqlalchemy import orm

    orm.configure_mappers()
    return application
