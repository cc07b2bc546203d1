"""Example jobs shipped with firesteel."""
