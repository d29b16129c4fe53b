"""Learning-rate schedules at a range of iterations: cases run with nnabla
(fixtures/nnabla/record_schedulers.py) and with dpnb (test_learning_rate_scheduler.py).
Each takes the library's ``nnabla.utils.learning_rate_scheduler`` module."""
ITERATIONS = [0, 1, 2, 9, 10, 11, 99, 100, 149, 150, 299, 300, 999]


def schedules(lrs) -> dict:
    made = {
        "polynomial": lrs.PolynomialScheduler(0.1, 1000, 0.9),
        "cosine": lrs.CosineScheduler(0.05, 300),
        "exponential": lrs.ExponentialScheduler(0.1, 0.5, 100),
        "exponential_every": lrs.ExponentialScheduler(0.1, 0.99),
        "step": lrs.StepScheduler(0.1, 0.1, [10, 150, 300]),
        "warmup": lrs.LinearWarmupScheduler(lrs.CosineScheduler(0.05, 1000), 100),
    }
    return {name: [float(s.get_learning_rate(i)) for i in ITERATIONS] for name, s in made.items()}
