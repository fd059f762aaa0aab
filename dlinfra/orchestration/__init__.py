"""The run engine every layer plugs into: Ansible via ansible-runner, wheelhouse, deploy, spec, cells, launch."""
