"""Stage 6, will it fit: GPU capacities and the "fits on" table, for the CLI and the app."""
