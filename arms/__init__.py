"""What an arm is and how it is measured.

runtimes/  one adapter per runtime (launch argv, health, identity, where counters live)
simulator/ the embedded serving simulator (a real server process)
server.py  start / wait healthy / stop a server process group, with its log
client.py  the streaming OpenAI-compatible client, composed of
           transport.py (sending, stamping bytes as they arrive), sse.py (framing)
           and events.py (chunk parsing into immutable values)
measures.py how each number is computed (its name and unit: campaign.core.metrics)
workloads/ what is sent and when: datasets, sessions, traces, load profiles, tool env
probes/    cache-probe, decode, and the rest; each writes rows through a sink

May import the core (`campaign.core.schema`, `campaign.core.states`, ...); never gates, flows,
reports or the CLI.
"""
