"""The virtual-time simulator's parts (`testbed sim`): what it keeps of a
run beside the engines themselves."""
