#!/usr/bin/env bash
# Runs one rank as if it were alone on its own host: for testing N ranks on a machine with fewer
# than N GPUs (the trainer gives local rank r the GPU r % GPUs, so ranks share GPUs).
#   mpirun -np 4 dev/device/own_host.sh build/bf16/train_gpt2cu ...    (or RANK=r ... for the env launch)
# NCCL refuses two ranks of one host on the same GPU ("Duplicate GPU detected"): it knows a host by
# a hash of its name, which NCCL_HOSTID replaces. With one host id per rank every rank is a node
# of its own to NCCL, which then connects them through its network transport, here TCP sockets on
# loopback (no P2P, no shared memory, no GPUDirect: every byte goes GPU -> host -> socket -> host
# -> GPU). Everything of the multi-GPU code runs as on N machines (NCCL init, the overlapped
# bucketed reduction on the communication stream, ZeRO-1's reduce-scatter and all-gather, the
# cross-rank loss, norm and overflow decisions, each rank's data slice, shutdown), so losses and
# exactness can be checked; times cannot (the ranks share one GPU's SMs and the wire is a socket).
rank=${OMPI_COMM_WORLD_RANK:-${RANK:-${SLURM_PROCID:-0}}}
export NCCL_HOSTID="own-host-rank$rank" NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo NCCL_MNNVL_ENABLE=0
exec "$@"
