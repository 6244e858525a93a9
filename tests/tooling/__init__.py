"""The repository itself: the load runner, the labs' private roots, the layout and the wheel."""
