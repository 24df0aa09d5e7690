#!/usr/bin/env bash
# Run a command with a CFS quota of CPUS CPUs' worth of time (its threads and children together), every CPU still
# visible: what a VM guest whose vCPUs the hypervisor holds part of the time, or a container with a CPU limit, gives
# a benchmark. Used to test why one benchmark gave 1.5x eager on one machine and 1.0x on another (docs/performance.md).
#   tools/cpu_quota.sh 1.0 python benchmarks/bench_models.py --models hf-gpt2 --modes infer
# Needs root and a writable cpu cgroup (v1: /sys/fs/cgroup/cpu, v2: /sys/fs/cgroup with the cpu controller).
set -euo pipefail
if [ $# -lt 2 ]; then echo "usage: tools/cpu_quota.sh CPUS COMMAND..." >&2; exit 2; fi
cpus="$1"; shift
period=100000
quota=$(python3 -c "print(int(float('$cpus') * $period))")
name="kernelgen-quota-$$"
if [ -d /sys/fs/cgroup/cpu ] && [ -w /sys/fs/cgroup/cpu ]; then
    dir="/sys/fs/cgroup/cpu/$name"
    mkdir "$dir"
    echo "$period" > "$dir/cpu.cfs_period_us"
    echo "$quota" > "$dir/cpu.cfs_quota_us"
elif [ -f /sys/fs/cgroup/cgroup.controllers ] && grep -qw cpu /sys/fs/cgroup/cgroup.controllers; then
    dir="/sys/fs/cgroup/$name"
    mkdir "$dir"
    echo "$quota $period" > "$dir/cpu.max"
else
    echo "tools/cpu_quota.sh: no writable cpu cgroup here (needs root and cgroup v1 cpu or v2 cpu.max)" >&2
    exit 2
fi
trap 'rmdir "$dir" 2>/dev/null || true' EXIT
echo "cpu quota: $cpus CPUs ($quota us per $period us) for: $*" >&2
# the command runs in a child shell moved into the group first, so everything it starts is inside
bash -c 'echo $$ > "$1/cgroup.procs"; shift; exec "$@"' _ "$dir" "$@"
