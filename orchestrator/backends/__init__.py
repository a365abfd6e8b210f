"""Ways of running real routers: the contract every backend implements (api), the registry by name,
and one package per backend: process, docker, swarm."""
