"""The tasks' data (``tasks``: ``TaskConfig`` and the generators).
"""
