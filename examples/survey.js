// @run_code: {"max_output_tokens": 3000, "timeout_seconds": 60}
// A survey of the workspace: list files, read a few, edit one, print a summary.
// Run it with:  codemode run examples/survey.js --workspace <dir>

const listing = await tools.bash({ command: "git ls-files 2>/dev/null || find . -type f -not -path './.*'" });
const files = listing.stdout.excerpt.split("\n").filter((f) => f && !f.startsWith(".git/"));

// Read up to 8 text files at once and keep only what we need from each.
const wanted = files.filter((f) => /\.(py|js|md|toml|txt)$/.test(f)).slice(0, 8);
const pages = await Promise.all(
  wanted.map((path) =>
    tools.read_file({ path, limit: 400 }).then(
      (page) => ({ path, lines: page.total_lines, first: page.content.split("\n")[0] }),
      (err) => ({ path, error: err.message }),
    ),
  ),
);

// Keep a small notes file up to date: create it once, then edit it in place.
const notes = "SURVEY.md";
const stamp = `files: ${files.length}, read: ${pages.length}`;
const existing = await tools.read_file({ path: notes }).catch(() => null);
if (existing === null) {
  await tools.write_file({ path: notes, content: `# Survey\n\n${stamp}\n`, create_only: true });
} else {
  const old = existing.content.split("\n").find((l) => l.startsWith("files: "));
  if (old && old !== stamp) await tools.edit_file({ path: notes, old_text: old, new_text: stamp });
}

print(`workspace has ${files.length} files; read ${pages.length}:`);
for (const p of pages) {
  print(p.error ? `  ${p.path}: ${p.error}` : `  ${p.path} (${p.lines} lines): ${p.first.slice(0, 70)}`);
}
print(`notes: ${notes} -> ${stamp}`);
