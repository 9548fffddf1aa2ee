"""The GraphQL layer: thin Strawberry types and resolvers over `api.service`."""
