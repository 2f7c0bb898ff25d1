from ttlearn.cli import app

app()
