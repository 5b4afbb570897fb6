"""The static report: jinja2 templates rendered from the campaign summary and the store.

Pages open from disk with no network (no CDN, inline CSS and SVG) and every value is
escaped by jinja2's autoescape. Reads the store, arms' definitions and gates' comparison
primitive; never flows or the CLI (it only reads what was measured).
"""
