"""Plain-Python domain rules: item types, change tokens, cursors, errors.

Nothing here imports strawberry, starlette, boto3 or pynamodb.
"""
