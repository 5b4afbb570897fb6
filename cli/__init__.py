"""The app layer: the `campaign` command line.

It alone wires the layers below (core, store and queue, arms and gates, flows, reports);
nothing below imports it. Heavy imports stay inside commands, so `--help` is instant.
"""
