"""``firesteel.template``: the connector to copy (see ``connectors/_template/README.md``)."""
