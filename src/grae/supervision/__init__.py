"""``grae train`` as a supervised process: a run that did not finish never exits 0.

:mod:`.supervisor` is the parent ``grae train`` becomes: it starts the training process, forwards signals to it,
watches what :mod:`.beacon` tells it from there (the reward function being called, the run's own exit), and turns
an end the run did not choose — a reward calling ``os._exit(0)``, forking a copy of the trainer, holding the
process past its time — into one line naming the reward function, a non-zero exit, and no process left behind.
"""
