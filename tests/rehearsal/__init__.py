"""A replay of the GitHub workflows on this machine (`make pipeline`): runner.py reads and runs them,
standins.py replaces GitHub's own actions, pipeline.py holds the scenarios and the claims they must prove."""
