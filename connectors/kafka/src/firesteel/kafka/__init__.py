"""Kafka connector for firesteel."""
