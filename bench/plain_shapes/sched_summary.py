#!/usr/bin/env python3
# Who waits on whom: reads `perf script -F comm,tid,cpu,time,event,trace` of a
# `perf record -e sched:sched_switch -e sched:sched_wakeup -e sched:sched_migrate_task -a`
# (sched_probe.sh) on a 2-CPU box and prints, for the tasks whose comm starts with one of
# argv[1]'s comma-separated prefixes: time on each CPU, migrations, wake-ups (waker, wakee,
# whether the wakee was queued on the waker's CPU), preemptions, and the CPU time lost
# while one of them waited to run on one CPU and the other CPU was idle (or ran others).
import sys, re, collections
ours = sys.argv[1].split(',')
def kind(comm):
    for o in ours:
        if comm.startswith(o): return o
    return None
ln = re.compile(r'^\s*(.+?)\s+(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+(\S+):\s+(.*)$')
running = {}     # cpu -> (tid, comm)
state = {}       # tid -> 'run'/'wait'/'sleep'
waitcpu = {}
comm_of = {}
on_cpu = collections.defaultdict(lambda: collections.Counter())  # kind -> cpu -> seconds
wakes = collections.Counter()  # (waker kind, wakee kind, same cpu?)
wake_to_idle = collections.Counter()
mig = collections.Counter()
preempt = collections.Counter()  # (victim kind, by kind)
last_t = None; t0 = None
lost_idle = 0.0; lost_other = 0.0; idle_total = 0.0; span = 0.0
switch_in = {}
for line in sys.stdin:
    m = ln.match(line)
    if not m: continue
    comm, tid, cpu, t, ev, tr = m.group(1), int(m.group(2)), int(m.group(3)), float(m.group(4)), m.group(5), m.group(6)
    if t0 is None: t0 = t
    if last_t is not None:
        dt = t - last_t
        span += dt
        for c in (0, 1):
            waiting = [x for x in state if state[x] == 'wait' and waitcpu.get(x) != c]
            r = running.get(c)
            if r is None: continue
            if r[0] == 0:
                idle_total += dt
                if waiting: lost_idle += dt
            elif kind(r[1]) is None and waiting:
                lost_other += dt
        for c in (0, 1):
            r = running.get(c)
            if r and r[0] != 0 and kind(r[1]):
                on_cpu[kind(r[1])][c] += dt
    last_t = t
    if ev == 'sched:sched_switch':
        d = dict(re.findall(r'(\w+)=(\S+)', tr))
        pt, nt = int(d['prev_pid']), int(d['next_pid'])
        pc = tr.split('prev_comm=')[1].split(' prev_pid=')[0]
        nc = tr.split('next_comm=')[1].split(' next_pid=')[0]
        if kind(pc):
            if d['prev_state'].startswith('R'):
                state[pt] = 'wait'; waitcpu[pt] = cpu
                if kind(nc): preempt[(kind(pc), kind(nc))] += 1
                else: preempt[(kind(pc), 'other' if nt else 'idle')] += 1
            else:
                state[pt] = 'sleep'
        if kind(nc):
            state[nt] = 'run'
        running[cpu] = (nt, nc)
    elif ev == 'sched:sched_wakeup':
        d = dict(re.findall(r'(\w+)=(\S+)', tr))
        wc = tr.split('comm=')[1].split(' pid=')[0]
        wt = int(d['pid']); tc = int(d['target_cpu'])
        if kind(wc):
            state[wt] = 'wait'; waitcpu[wt] = tc
            wk = kind(comm) or ('irq/idle' if tid == 0 else 'other')
            other = 1 - tc
            ro = running.get(other)
            wakes[(wk, kind(wc), 'same' if tc == cpu else 'other')] += 1
            if ro and ro[0] == 0: wake_to_idle[(kind(wc), 'target' if tc == cpu else 'x', 'othercpu_idle')] += 1
    elif ev == 'sched:sched_migrate_task':
        d = dict(re.findall(r'(\w+)=(\S+)', tr))
        mc = tr.split('comm=')[1].split(' pid=')[0]
        if kind(mc): mig[kind(mc)] += 1
print('span %.3f s (per CPU); idle %.3f cpu-s; idle while one of ours waited to run: %.3f cpu-s; other tasks ran while ours waited: %.3f cpu-s' % (span, idle_total, lost_idle, lost_other))
for k, c in on_cpu.items():
    print('on-cpu %-8s cpu0 %.3f cpu1 %.3f s' % (k, c[0], c[1]))
print('migrations', dict(mig))
print('wake-ups (waker, wakee, target cpu = waker cpu?):')
for k, v in sorted(wakes.items(), key=lambda x: -x[1]): print('  ', k, v)
print('wake-ups while the other CPU was idle:', dict(wake_to_idle))
print('preemptions (victim, by):')
for k, v in sorted(preempt.items(), key=lambda x: -x[1]): print('  ', k, v)
