# bench/apps: a 600k-key hash built, sorted, half deleted; 300k small arrays
my %h; for my $i (1..600000) { $h{"key$i"} = "v" x ($i % 50) . $i; }
my @k = sort keys %h; my $s = 0; for my $k (@k) { $s += length($h{$k}); }
for my $i (1..300000) { delete $h{"key$i"}; }
my @a = map { [$_, "x$_"] } 1..300000; print "$s ", scalar(@a), "\n";
