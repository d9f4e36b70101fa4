from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True
    dependencies: list = []

    operations = [
        migrations.CreateModel(
            name="IndexedDocument",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("doc_id", models.CharField(max_length=64, unique=True)),
                ("title", models.CharField(max_length=200)),
                ("words", models.PositiveIntegerField()),
                ("vector", models.JSONField()),
                ("indexed_at", models.DateTimeField(auto_now_add=True)),
            ],
        ),
    ]
