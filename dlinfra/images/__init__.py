"""Base images built locally (no registry): debootstrap rootfs for containers and guests."""
