"""grae.printing: a console line is printed as it is, whatever it holds, and whole."""

import io

from rich.console import Console

from grae.printing import line_printer, print_line


def test_markup_emoji_and_long_lines_print_as_they_are():
    out = io.StringIO()
    console = Console(file=out, width=40, color_system=None)
    text = "runs/[red]x[/red]/eval.jsonl:100: " + "y" * 80
    print_line(console, text)
    line_printer(console)(3)
    assert out.getvalue() == text + "\n3\n"


def test_without_a_console_it_prints(capsys):
    print_line(None, "[b]plain[/b]")
    assert capsys.readouterr().out == "[b]plain[/b]\n"
