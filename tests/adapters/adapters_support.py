"""What the adapter tests share: a program that reads the workspace's notes file."""

COUNT = (
    'const f = await tools.read_file({path: "notes.txt"}); print(f.content.split("\\n").length - 1, "lines")'
)
