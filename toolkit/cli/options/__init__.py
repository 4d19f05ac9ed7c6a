"""How the commands are declared: shared options, help sections, lazy loading, spellings."""
