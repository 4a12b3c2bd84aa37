"""Coordinate descent on column blocks: the program behind Lasso and ElasticNet."""
