# bench/apps: strings, arrays and hashes built and dropped by 4 threads (the GVL runs one at a time)
def work(seed)
  r = Random.new(seed)
  keep = []
  60_000.times do |i|
    s = "x" * (16 + r.rand(2000))
    h = { a: s, b: [s.upcase, i.to_s * 3], c: (1..r.rand(40)).to_a }
    keep << h
    keep.shift(keep.size / 2) if keep.size > 20_000
    s.sub!(/x+/) { |m| m[0, m.size / 2] } if i % 7 == 0
  end
  keep.sum { |h| h[:a].size }
end
ts = 4.times.map { |t| Thread.new { work(t) } }
puts ts.map(&:value).sum
