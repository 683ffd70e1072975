"""The search: rewrite rules, fusion and schedules chosen by a cost model (docs/ARCHITECTURE.md, "Search")."""
