# The two commands a newcomer needs: `make demo` and `make test`.
.PHONY: demo test check

demo:
	@scripts/demo

test:
	@scripts/test

check:
	@.venv/bin/python manage.py check && .venv/bin/python manage.py makemigrations --check --dry-run
