"""The source documents' tables and curves, regenerated exactly in document mode.

May import: capsim.api and everything below it."""
