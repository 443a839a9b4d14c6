"""placeholder"""
def register(app, bench_app):
    pass
