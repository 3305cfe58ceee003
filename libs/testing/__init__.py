"""rocketmesh.testing: a pytest plugin that gives an application's tests a real mesh on free ports."""
