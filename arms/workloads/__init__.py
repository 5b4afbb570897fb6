"""Workloads: what is sent to a server and when, apart from the probes that send it.

Datasets, recorded sessions and traces are read here, the load profiles (closed and open
loop, the schedule and its lag) are defined here, and the tool environment an agent's tool
calls run against lives here, so the simulator and the probes share them without one
importing the other.
"""
