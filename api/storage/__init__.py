"""DynamoDB single-table storage: key design, PynamoDB models, the store."""
