/bin/mkdir "$out"
/bin/cp "$setup" "$out/setup"
