"""Resource providers: one module per resource type; observe (I/O), plan (pure), apply (I/O)."""
