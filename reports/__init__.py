"""The static report: jinja2 templates rendered from the campaign summary and the store.

Pages open from disk with no network (no CDN, inline CSS and SVG) and every value is
escaped by jinja2's autoescape. May import `campaign`, never `flows`.
"""
