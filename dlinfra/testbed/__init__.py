"""Local testbed: SSH "hosts" made of network namespaces on this machine.

Each host is a network namespace (its own address on a Linux bridge) plus a
UTS namespace (its own hostname) with its own sshd, host keys and config. The
controller reaches them over real SSH, so Ansible and fabric run exactly as
they would against a real cluster. See :mod:`dlinfra.testbed.local`.
"""
