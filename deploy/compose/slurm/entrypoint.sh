#!/bin/sh
# Entry point of the demo Slurm image (deploy/compose/slurm/Dockerfile).
#   munged        munge, with the cluster's key (made on first start, kept in a volume); its
#                 socket folder is a volume that every Slurm and relaunch container mounts
#   slurmctld     the controller, in the foreground
#   slurmd NODE   one compute node, in the foreground
#   anything else is run as given
set -eu
case "${1:-}" in
  munged)
    mkdir -p /etc/munge /run/munge
    chown munge:munge /etc/munge /run/munge
    chmod 0700 /etc/munge
    chmod 0755 /run/munge
    if [ ! -s /etc/munge/munge.key ]; then
      runuser -u munge -- mungekey --create --keyfile=/etc/munge/munge.key
    fi
    chown munge:munge /etc/munge/munge.key
    chmod 0400 /etc/munge/munge.key
    exec runuser -u munge -- munged --foreground
    ;;
  slurmctld)
    exec slurmctld -D
    ;;
  slurmd)
    node=${2:?usage: entrypoint.sh slurmd NODE}
    mkdir -p "/var/spool/slurmd/$node"
    exec slurmd -D -N "$node"
    ;;
  *)
    exec "$@"
    ;;
esac
