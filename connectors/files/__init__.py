"""The file connector: format ``firesteel.files`` (Parquet/CSV/JSON-lines/text source, transactional sink)."""
